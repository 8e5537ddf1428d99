//! The `ObjectStore` methods a wrapping store passes to its `inner` store
//! unchanged, written once for the wrappers that change only some of what
//! they put and get ([`super::commit::CheckThenPut`],
//! [`super::fault::FaultStore`]): [`pass_through_store!`] implements the
//! trait with the wrapper's own methods, the ones it names as passed through
//! (`put_multipart_opts`, `get_opts`, `get_ranges`), and deletes, lists and
//! copies, always passed through.

/// `impl ObjectStore for $store`: the methods given, those of
/// `put_multipart_opts`, `get_opts` and `get_ranges` named in the list
/// forwarded to `self.inner`, and `delete_stream`, `list`,
/// `list_with_offset`, `list_with_delimiter` and `copy_opts` forwarded.
///
/// ```ignore
/// pass_through_store!(MyStore, [get_opts, get_ranges], {
///     async fn put_opts(&self, …) -> object_store::Result<PutResult> { … }
/// });
/// ```
macro_rules! pass_through_store {
    ($store:ty, [$($forward:ident),* $(,)?], { $($methods:tt)* }) => {
        pass_through_store!(@collect $store; [$($forward)*]; { $($methods)* });
    };
    (@collect $store:ty; [put_multipart_opts $($rest:ident)*]; { $($methods:tt)* }) => {
        pass_through_store!(@collect $store; [$($rest)*]; {
            $($methods)*
            async fn put_multipart_opts(
                &self,
                location: &object_store::path::Path,
                opts: object_store::PutMultipartOptions,
            ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
                self.inner.put_multipart_opts(location, opts).await
            }
        });
    };
    (@collect $store:ty; [get_opts $($rest:ident)*]; { $($methods:tt)* }) => {
        pass_through_store!(@collect $store; [$($rest)*]; {
            $($methods)*
            async fn get_opts(
                &self,
                location: &object_store::path::Path,
                options: object_store::GetOptions,
            ) -> object_store::Result<object_store::GetResult> {
                self.inner.get_opts(location, options).await
            }
        });
    };
    (@collect $store:ty; [get_ranges $($rest:ident)*]; { $($methods:tt)* }) => {
        pass_through_store!(@collect $store; [$($rest)*]; {
            $($methods)*
            async fn get_ranges(
                &self,
                location: &object_store::path::Path,
                ranges: &[std::ops::Range<u64>],
            ) -> object_store::Result<Vec<bytes::Bytes>> {
                self.inner.get_ranges(location, ranges).await
            }
        });
    };
    (@collect $store:ty; []; { $($methods:tt)* }) => {
        #[async_trait::async_trait]
        impl object_store::ObjectStore for $store {
            $($methods)*

            fn delete_stream(
                &self,
                locations: futures::stream::BoxStream<
                    'static,
                    object_store::Result<object_store::path::Path>,
                >,
            ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>
            {
                self.inner.delete_stream(locations)
            }

            fn list(
                &self,
                prefix: Option<&object_store::path::Path>,
            ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
            {
                self.inner.list(prefix)
            }

            fn list_with_offset(
                &self,
                prefix: Option<&object_store::path::Path>,
                offset: &object_store::path::Path,
            ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
            {
                self.inner.list_with_offset(prefix, offset)
            }

            async fn list_with_delimiter(
                &self,
                prefix: Option<&object_store::path::Path>,
            ) -> object_store::Result<object_store::ListResult> {
                self.inner.list_with_delimiter(prefix).await
            }

            async fn copy_opts(
                &self,
                from: &object_store::path::Path,
                to: &object_store::path::Path,
                options: object_store::CopyOptions,
            ) -> object_store::Result<()> {
                self.inner.copy_opts(from, to, options).await
            }
        }
    };
}

pub(crate) use pass_through_store;
